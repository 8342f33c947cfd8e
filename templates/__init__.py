"""The built-in Jinja templates (a package only so that they ship in the wheel)."""
