"""The pip line that installs an extra of orsgen for the orsgen that is running. orsgen is on no package index yet,
so `pip install "orsgen[plot]"` finds nothing: the line names the extra's plain packages, as the installed
distribution's metadata lists them, which install the same whatever way orsgen itself was installed."""

import re
from importlib import metadata


def pip(*extras: str) -> str:
    """`pip install "matplotlib>=3.7"` for `pip("plot")`: the packages of `extras`, in the order the metadata lists
    them; `pip install "orsgen[...]"` only when no metadata is found (orsgen run from a source tree)."""
    try:
        requires = metadata.requires("orsgen") or []
    except metadata.PackageNotFoundError:
        requires = []
    found = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if extra is not None and extra.group(1) in extras and not spec.strip().startswith("orsgen"):
            found.append(spec.replace(" ", ""))
    if not found:
        return f'pip install "orsgen[{",".join(extras)}]"'
    return "pip install " + " ".join(f'"{spec}"' for spec in dict.fromkeys(found))
