"""docs/migration.md's field tables are generated from the catalogue and cover every field of dcgm-exporter's files."""

from __future__ import annotations

from exporter.catalogue.dcgm_exporter_files import FILES
from exporter.catalogue.migration_table import BEGIN, DOC, END, table


def test_the_committed_tables_are_what_the_catalogue_generates() -> None:
    text = DOC.read_text()
    committed = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert committed == table(), "docs/migration.md is stale: run python -m exporter.catalogue.migration_table"


def test_every_field_of_every_file_has_a_row_saying_where_it_is_served() -> None:
    rows = [line for line in table().splitlines() if line.startswith("| `")]
    for name, lines in FILES.items():
        for line in lines:
            row = next((r for r in rows if f"`{line.name}`" in r), None)
            assert row is not None, f"{name}: {line.name} has no row"
            served = row.split(" | ")[3]
            assert served, row
