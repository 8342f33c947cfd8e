"""One build step pyproject.toml cannot say: the top-level templates/ folder ships in the wheel as orsgen/templates/
(found there by orsgen.builtin; an editable install reads templates/ itself)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

TEMPLATES = Path(__file__).resolve().parent / "templates"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "orsgen" / "templates"
        if target.exists():  # a build folder left by an older layout (templates/ as a package): not shipped
            shutil.rmtree(target)
        self.mkpath(str(target))
        for template in sorted(TEMPLATES.glob("*.jinja")):
            self.copy_file(str(template), str(target / template.name))


setup(cmdclass={"build_py": BuildPy})
