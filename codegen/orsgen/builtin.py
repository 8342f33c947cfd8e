"""Where the built-in Jinja templates are: inside the installed package (a wheel ships them as `orsgen/templates/`),
or the source tree's top-level `templates/` folder (an editable install, a plain path entry that mypy and IDEs
follow: a package-dir mapping for the templates would make it an import hook they cannot see)."""

from pathlib import Path


def templates() -> Path:
    package = Path(__file__).resolve().parent
    shipped = package / "templates"
    return shipped if shipped.is_dir() else package.parent.parent / "templates"
