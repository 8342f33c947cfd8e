"""`orsgen eval` and `--report` make each tool's schema as TRL offers it (transformers' `get_json_schema`) without
importing torch, which transformers imports at every typed parameter only to map `torch.Tensor` (orsgen/offered.py): a
fresh interpreter (a test worker has torch loaded) makes every golden module's schemas, then imports torch and makes
them again as a trainer would."""

import json
import sys

from tests.harness import ROOT, processes
from tests.harness.evaluation import environ

SCRIPT = """
import importlib.util, json, pathlib, sys
from orsgen.evaluate.target import tool_methods
from orsgen.offered import json_schema
from transformers.utils import chat_template_utils, get_json_schema

classes = []
for path in sorted(pathlib.Path("tests/golden").glob("*/expected.py")):
    spec = importlib.util.spec_from_file_location("golden_" + path.parent.name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    classes += [cls for _, cls in sorted(module.ENVIRONMENTS.items())]
without = [[json_schema(method) for method in tool_methods(cls())] for cls in classes]
loaded = "torch" in sys.modules
patched = chat_template_utils.is_torch_available()  # given back: transformers sees torch again
import torch
with_torch = [[get_json_schema(method) for method in tool_methods(cls())] for cls in classes]
print(json.dumps({"classes": len(classes), "loaded": loaded, "available": patched, "same": without == with_torch,
                  "tools": sum(map(len, without))}))
"""


def test_the_schemas_are_trls_get_json_schemas_made_without_importing_torch():
    done = processes.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=environ(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["classes"] >= 8 and seen["tools"] >= 20, seen  # every golden case, task-tool classes included
    assert seen == {**seen, "loaded": False, "available": True, "same": True}
