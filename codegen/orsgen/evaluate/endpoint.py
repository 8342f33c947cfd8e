"""The model: any OpenAI-compatible chat endpoint (vLLM, SGLang, TGI, `transformers serve`, a hosted API), through
the `openai` client the openreward SDK brings. A 429 slows the whole run down (`busy`) and the request is asked
again; every other failure is one line (`EndpointError`)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.evaluate.options import public

BUSY_ATTEMPTS = 10  # 429s in a row before a request fails
SERVER_ERROR_RETRIES = 2  # a 5xx is asked again this many times (1 s, then 2 s later)
PROBE = "orsgen eval checks that this endpoint takes tools: answer OK."


class EndpointError(Exception):
    """A request the endpoint failed, in one line."""


@dataclass
class Reply:
    """One assistant turn: TRL's form of it (`turn`, tool-call arguments as dicts), the calls as the endpoint sent
    them (`calls`: id, name, the arguments' JSON text), the tokens it reported, and how long it took."""

    turn: dict[str, Any]
    calls: list[tuple[str, str, str]]
    usage: dict[str, int] | None
    seconds: float


@dataclass
class Endpoint:
    url: str | None  # None: OPENAI_BASE_URL, else the openai client's default (api.openai.com)
    model: str
    sampling: dict[str, Any]
    timeout: float
    busy: Callable[[float | None], None] = lambda seconds: None  # told of each 429 (its Retry-After)
    strip_return: bool = False  # the endpoint refused get_json_schema's "return" key: tools go without it
    _client: Any = field(default=None, repr=False)

    @property
    def where(self) -> str:
        url = public(self.url or os.environ.get("OPENAI_BASE_URL"))[0]  # never its user:password@ or query string
        return url or "https://api.openai.com/v1 (the openai default)"

    def secrets(self) -> list[str]:
        """What no record may hold: the endpoint's API key."""
        key = os.environ.get("OPENAI_API_KEY")
        return [key] if key else []

    def client(self) -> Any:
        if self._client is None:
            import openai

            key = os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers take any key; a hosted API says 401
            self._client = openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=self.timeout)
        return self._client

    # -- before any episode --------------------------------------------------------------------------------------

    def check_served(self) -> None:
        """OrsgenError, one line, for an endpoint out of reach, refusing the key, or not serving the model."""
        import openai

        try:
            served = [m.id for m in self.client().models.list()]
        except (openai.NotFoundError, openai.InternalServerError):
            served = None  # no /models here (or a broken one): the probe finds a wrong name
        except openai.APIError as exc:
            raise OrsgenError(self._said(exc)) from None
        if served is not None and self.model not in served:
            raise OrsgenError(f"the endpoint at {self.where} does not serve {self.model!r}: it serves "
                              f"{', '.join(map(repr, served)) or 'no model'} (--model)")

    def check_tools(self, tools: list[dict[str, Any]]) -> None:
        """OrsgenError, one line, for an endpoint without tool calling (or any other refusal of a request)."""
        try:  # what is refused shows in the status (400, 401, 404): one token of reply is enough
            self._ask([{"role": "user", "content": PROBE}], tools, {"max_tokens": 1}, probe=True)
        except EndpointError as exc:
            raise OrsgenError(str(exc)) from None

    # -- a turn --------------------------------------------------------------------------------------------------

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int | None) -> Reply:
        began = time.perf_counter()
        extra = {} if seed is None else {"seed": seed}
        response = self._ask(messages, tools, {**self.sampling, **extra})
        message = response.choices[0].message
        calls = [(c.id or f"call_{i}", c.function.name, c.function.arguments or "{}")
                 for i, c in enumerate(message.tool_calls or []) if getattr(c, "function", None) is not None]
        turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if calls:
            turn["tool_calls"] = [{"type": "function", "function": {"name": name, "arguments": _arguments(text)}}
                                  for _, name, text in calls]
        usage = None
        if response.usage is not None:
            usage = {"prompt_tokens": int(response.usage.prompt_tokens or 0),
                     "completion_tokens": int(response.usage.completion_tokens or 0)}
        return Reply(turn, calls, usage, time.perf_counter() - began)

    def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: dict[str, Any],
             probe: bool = False) -> Any:
        import openai

        sent = [_without_return(t) for t in tools] if self.strip_return else tools
        failed = 0
        for attempt in range(BUSY_ATTEMPTS + SERVER_ERROR_RETRIES):
            try:
                return self.client().chat.completions.create(model=self.model, messages=messages,
                                                             **({"tools": sent} if sent else {}), **sampling)
            except openai.RateLimitError as exc:
                wait = _retry_after(exc)
                self.busy(wait)
                time.sleep(min(wait if wait is not None else 2.0 ** attempt, 30.0))
            except openai.BadRequestError as exc:
                if probe and tools and not self.strip_return and "return" in str(exc.message):
                    self.strip_return = True  # get_json_schema's "return" (what chat templates render) refused
                    return self._ask(messages, tools, sampling, probe)
                raise EndpointError(self._said(exc, tools_sent=bool(tools))) from None
            except openai.APITimeoutError as exc:  # waited --timeout already
                raise EndpointError(self._said(exc)) from None
            except (openai.InternalServerError, openai.APIConnectionError) as exc:  # a passing fault (a 5xx, a
                # connection the server dropped after one) is asked again, twice
                if probe and isinstance(exc, openai.InternalServerError):  # it took the request (a model cut at
                    return None  # max_tokens mid tool call may make a server fail)
                failed += 1
                if failed > SERVER_ERROR_RETRIES:
                    raise EndpointError(self._said(exc)) from None
                time.sleep(float(failed))
            except openai.APIError as exc:
                raise EndpointError(self._said(exc)) from None
        raise EndpointError(f"the endpoint at {self.where} answered 429 (busy) {BUSY_ATTEMPTS} times in a row")

    def _said(self, exc: Any, tools_sent: bool = False) -> str:
        """An endpoint's failure in one line: where, what, and what to check."""
        import openai

        where = f"the endpoint at {self.where}"
        message = re.sub(r"^Error code: \d+ - ", "", " ".join(str(getattr(exc, "message", None) or exc).split()))[:300]
        if isinstance(exc, openai.APITimeoutError):
            return f"{where} did not answer within {self.timeout:g}s (--timeout)"
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = " ".join(str(cause).split())[:200] if cause else message
            return (f"cannot reach {where}: {why}: is it running, and is --base-url (or OPENAI_BASE_URL) its /v1 "
                    "address?")
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return f"{where} refused the API key ({status}): set OPENAI_API_KEY"
        if status == 404:
            return f"{where} answered 404 for model {self.model!r}: {message} (--model, --base-url ending in /v1?)"
        if status == 400 and tools_sent and "tool" in message.lower():
            return (f"{where} does not take tool calls: {message} (vLLM: --enable-auto-tool-choice --tool-call-parser "
                    "NAME; SGLang: --tool-call-parser NAME)")
        said = "" if not message or message == f"Error code: {status}" else f": {message}"
        return f"{where} answered {status or 'an error'}{said}"


def _arguments(text: str) -> Any:
    """A call's arguments as TRL passes them (a dict), or the text itself when it is not a JSON object."""
    try:
        found = json.loads(text)
    except ValueError:
        return text
    return found if isinstance(found, dict) else text


def _retry_after(exc: Any) -> float | None:
    try:
        return float(exc.response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None


def _without_return(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: v for k, v in tool.get("function", {}).items() if k != "return"}
    return {**tool, "function": function}
