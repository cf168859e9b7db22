"""The docs: their generated parts are what the code says, and the README is the short page
a newcomer starts from, whose links lead somewhere. (`make test` also builds the site with
``mkdocs build --strict``, which fails on a broken link inside docs/.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_what_the_code_says():
    """docs/configuration.md from TableProperties, docs/cli.md from the typer app."""
    assert _generator().stale_pages() == [], "run: python docs/generate.py"


def test_the_configuration_page_has_every_property_and_the_cli_page_every_command():
    import typer

    from lamina.cli.main import app
    from lamina.spec.properties import TableProperties

    config = (ROOT / "docs" / "configuration.md").read_text()
    assert all(f"### `{p.key}`" in config for p in TableProperties.all())
    cli = (ROOT / "docs" / "cli.md").read_text()
    root = typer.main.get_command(app)
    ctx = typer.Context(root, info_name="lamina")
    for name in root.list_commands(ctx):
        assert f"## `lamina {name}`" in cli
        sub = root.get_command(ctx, name)
        if hasattr(sub, "list_commands"):
            assert all(f"### `lamina {name} {s}`" in cli for s in sub.list_commands(typer.Context(sub, info_name=name)))


def test_a_generated_page_that_lags_the_code_is_caught(tmp_path, monkeypatch):
    gen = _generator()
    for page in gen.PAGES:
        (tmp_path / page).write_text((gen.DOCS / page).read_text())
    monkeypatch.setattr(gen, "DOCS", tmp_path)
    assert gen.stale_pages() == []
    page = tmp_path / "configuration.md"
    page.write_text(page.read_text().replace("### `write.delete.mode`", "### `write.delete-mode`"))
    assert gen.stale_pages() == ["configuration.md"]
    assert gen.main([]) == 0 and gen.stale_pages() == []  # regenerated


def test_the_readme_starts_with_what_lamina_is_then_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 100
    assert lines[0] == "# Lamina"
    block = README.index("```sh\n")
    intro = README[len(lines[0]):block].strip()
    assert 0 < len(re.findall(r"[.!?](\s|$)", intro)) <= 2, intro  # one or two sentences, then the commands
    commands = README[block + len("```sh\n"):].split("```", 1)[0].splitlines()
    assert [c.split("#")[0].strip() for c in commands] == ["make demo", "make test"]


def test_the_readme_links_lead_to_files_that_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert targets, "the README links into the docs"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []
