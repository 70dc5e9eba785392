"""The README is a front page: what jitkern is, how to install it, a first kernel and links; users of
SGLang's JIT kernels are pointed to docs/migrating.md near the top, which shows the switch; the op
reference is docs/ops.md; the developer commands CI runs are still there; its settings table is the engine's."""

import re
from conftest import REPO

README = (REPO / "README.md").read_text()


def test_readme_is_a_front_page_with_its_links():
    top = "\n".join(README.splitlines()[:15])
    assert "SGLang" in top and "(docs/migrating.md)" in top, top
    assert "## Install" in README and "pip install /path/to/jitkern" in README
    assert len(README.splitlines()) < 260, "the op reference belongs in docs/ops.md"
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (REPO / link).is_file(), f"README links {link}, which does not exist"
    assert "(docs/ops.md)" in README and "| `rmsnorm(input, weight, output=None, eps=1e-6)` |" in (REPO / "docs" / "ops.md").read_text()
    assert "scripts/test.sh" in README and "scripts/demo.sh" in README  # CI runs .ci/run -> scripts/test.sh
    assert "| `cuda_wrappers`" in README or "`cpp_wrappers`, `cuda_wrappers` |" in README, "load_jit's keywords are a table"
    assert "Without `HOME`" in README and "/tmp/jitkern-<uid>/.cache/jitkern" in README


def test_migrating_names_sglang_and_shows_the_switch():
    text = (REPO / "docs" / "migrating.md").read_text()
    head = "\n".join(text.splitlines()[:12])
    assert "SGLang" in head and "from sglang.jit_kernel.utils import" in head and "from jitkern.compat import" in head, head


def test_what_the_readme_says_of_an_unset_home_holds():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "JITKERN_CACHE_DIR")}
    code = ("from jitkern._engine import config\n"
            "print(next(s['effective'] for s in config()['settings'] if s['name'] == 'JITKERN_CACHE_DIR'))")
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"/tmp/jitkern-{os.getuid()}/.cache/jitkern"


def test_readme_lists_every_setting():
    """The README's table of environment variables is the engine's own (src/engine/config/settings.cc), verbatim."""
    import jitkern._engine

    table = jitkern._engine.settings_markdown()
    assert "JITKERN_COMPILE_TIMEOUT" in table and "JITKERN_CACHE_DIR" in table
    assert table in README, "README.md's settings table differs from `python -m jitkern config --markdown`:\n" + table
