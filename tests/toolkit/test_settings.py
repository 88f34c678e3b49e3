"""The settings model stands apart from the servers' runtime: reading flags loads no connection guard."""

from __future__ import annotations

import subprocess
import sys

from toolkit.connections import ConnectionLimits
from toolkit.settings import ConnectionSettings


def test_the_settings_model_does_not_import_the_connection_guard() -> None:
    code = "import sys, toolkit.settings; print(sorted(m for m in sys.modules if m.startswith('toolkit.connection')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_three_flags_make_the_limits() -> None:
    settings = ConnectionSettings(max_connections=7, header_read_timeout=2.5, idle_timeout=30.0)
    assert ConnectionLimits.of(settings) == ConnectionLimits(7, header_read_timeout=2.5, idle_timeout=30.0)
