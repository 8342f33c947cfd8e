"""A test environment whose tools use every JSON Schema construct real ORS servers publish.

Every tool echoes the validated input it received (by alias, as JSON), so a test sees exactly what reached the
server. Tools whose names are not Python identifiers are attached with `setattr`, as the SDK allows.
"""

from enum import Enum, IntEnum
from typing import Annotated, Any, Literal

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, ConfigDict, Field

TASKS = [{"id": "t0", "topic": "search"}, {"id": "t1", "topic": "create"}, {"id": "t2", "topic": "misc"}]


class SortOrder(str, Enum):
    """Sort direction."""

    ASC = "asc"
    DESC = "desc"


class Priority(IntEnum):
    LOW = 1
    HIGH = 2


class SearchParams(BaseModel):
    """Search parameters (this model docstring becomes the schema's top-level description)."""

    query: str = Field(description="Free-text query")
    mode: Literal["fast", "deep"] = Field("fast", description="Search depth")
    sort: SortOrder = SortOrder.ASC
    priority: Priority = Priority.LOW
    limit: int | None = Field(None, description="Most results to return")
    required_nullable: str | None = Field(description="Required but may be null")
    tags: list[str] = Field(default_factory=list, description="Tags to filter by")
    weights: dict[str, float] = Field(description="Weight per field")
    extras: dict[str, Any] = Field(default_factory=dict)
    id_or_name: int | str = 0
    pair: tuple[int, str] = (0, "a")
    matrix: list[list[int]] = Field(default_factory=list)
    only: Literal["only"] = "only"
    exact: bool = False
    threshold: float = 0.5


class Address(BaseModel):
    street: str
    city: str = "Paris"


class Item(BaseModel):
    """An item to create."""

    name: str = Field(description="Human readable name", min_length=1, max_length=64)
    quantity: int = Field(1, ge=0, le=1000, description="How many")
    price: float = Field(gt=0)
    kind: Literal["book", "food", "tool"] = "book"
    address: Address | None = None


class Node(BaseModel):
    """A recursive tree node."""

    value: int
    children: list["Node"] = Field(default_factory=list)


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int = 1


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float = 1.0


class CreateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item: Item
    extra_items: list[Item] = Field(default_factory=list)
    lookup: dict[str, Item] = Field(default_factory=dict)
    backup: Item | None = None
    tree: Node | None = None
    pet: Annotated[Cat | Dog, Field(discriminator="pet_type")] | None = None
    code: str = Field("AB-1", pattern=r"^[A-Z]{2}-\d+$", min_length=4)
    count: int = Field(1, ge=0, le=10)
    title: str = Field("untitled", title="Custom Title", description="A property literally named 'title'")
    source: str = Field("here", alias="from", description="Wire name is the keyword 'from'")
    klass: str = Field(alias="class", description="Wire name is the keyword 'class'")
    owner: str = Field(alias="self", description="Wire name is 'self'")
    max_results: int = Field(10, alias="max-results", ge=1, le=100, description="Wire name has a hyphen")
    color: str = Field("red", examples=["red", "blue"])


class WebSearchParams(BaseModel):
    query: str = Field(description="What to look for")
    site: str | None = Field(None, description="Restrict to one site")


class FileReadParams(BaseModel):
    path: str
    offset: int = Field(0, ge=0)


class ImportParams(BaseModel):
    module: str
    names: list[str] = Field(default_factory=list)


class EpisodeParams(BaseModel):
    episode: int = 0


class FinishedParams(BaseModel):
    reason: str = "done"


class SecretParams(BaseModel):
    secret: str


class CafeParams(BaseModel):
    sugar: int = Field(1, ge=0)
    milk: bool = False


class WeirdParams(BaseModel):
    path: str  # no description: the docstring's own Args entry is the only one
    note: str = Field(description='First line\nsecond line (choices: ["a"])')


def echo(params: BaseModel) -> ToolOutput:
    return ToolOutput(blocks=[TextBlock(text=params.model_dump_json(by_alias=True))])


class Rich(Environment):
    """Echo tools covering names, nested models, aliases and docstrings."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return TASKS

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Task {self.task_spec['id']}: call the tools")]

    @tool
    def search(self, params: SearchParams) -> ToolOutput:
        """Search with every scalar, enum and container argument."""
        return echo(params)

    @tool
    def create(self, params: CreateParams) -> ToolOutput:
        """Create an item from nested models."""
        return echo(params)

    @tool
    def ping(self) -> ToolOutput:
        """A tool that takes no arguments."""
        return ToolOutput(blocks=[TextBlock(text="{}")])

    @tool
    def weird_doc(self, params: WeirdParams) -> ToolOutput:
        """Description with \"\"\"triple quotes\"\"\", 'single', a backslash \\ and {braces}.

        Args:
            path: the path to read
        Returns:
            nothing useful
        """
        return echo(params)


def web_search(self, params: WebSearchParams) -> ToolOutput:
    """Search the web."""
    return echo(params)


def file_read(self, params: FileReadParams) -> ToolOutput:
    """Read a file."""
    return echo(params)


def import_(self, params: ImportParams) -> ToolOutput:
    """Import names from a module."""
    return echo(params)


def get_reward(self, params: EpisodeParams) -> ToolOutput:
    """A tool named like TRL's reserved method."""
    return echo(params)


def finished(self, params: FinishedParams) -> ToolOutput:
    """A tool named like the adapter's episode flag; it does not end the episode."""
    return echo(params)


def private(self, params: SecretParams) -> ToolOutput:
    """A tool whose name starts with an underscore."""
    return echo(params)


def cafe(self, params: CafeParams) -> ToolOutput:
    """Order a coffee (a non-ASCII tool name)."""
    return echo(params)


# Wire names that are not plain identifiers, or that collide with names the adapter or TRL reserve.
EXTRA_TOOLS = {
    "web-search": web_search,
    "file.read": file_read,
    "import": import_,
    "get_reward": get_reward,
    "finished": finished,
    "_private": private,
    "café": cafe,
}
for _name, _fn in EXTRA_TOOLS.items():
    setattr(Rich, _name, tool(_fn))
