"""docs/outputs.md documents every column the writer knows; the README image is small."""

import re

from tests.conftest import REPO
from vidur_fast.outputs.schema import GROUP_COLUMNS


def test_every_schema_column_is_documented_with_its_unit():
    doc = (REPO / "docs" / "outputs.md").read_text()
    for group, cols in GROUP_COLUMNS.items():
        section = doc.split(f"### `{group}`", 1)[1].split("\n### ", 1)[0]
        for name, (unit, _) in cols.items():
            assert f"| `{name}` | {unit} |" in section, (group, name)


def test_readme_image_exists_and_is_small():
    readme = (REPO / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", readme)
    assert images
    for rel in images:
        path = REPO / rel
        assert path.is_file() and 0 < path.stat().st_size < 150_000, rel
