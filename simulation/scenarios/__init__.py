"""Built-in simulator scenarios, as YAML data files (a package so that they ship with the wheel)."""
