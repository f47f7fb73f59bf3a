"""campaigns/README.md names the device campaigns tools/device_verify.sh defines (the one launcher), each with its
implementation, preset / op, budget, workers and step, and no other: the table cannot drift from the script."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launcher_campaigns(script):
    """(name, impl, args, seconds, workers, step) of every campaign in the launcher's waves: `want STEP && wave
    SECONDS "description" "NAME WORKERS IMPL [ARGS...]"...`."""
    rows = set()
    for step, seconds, body in re.findall(r"^want (\w+) && wave (\d+) (.*?)(?=^want |^step |\Z)", script, re.M | re.S):
        for text in re.findall(r'"([^"]*)"', body):
            m = re.fullmatch(r"(\S+) (\d+) ([\w.-]+)((?: \S+)*)", text)
            if m and ("." in m[3] or m[3] == "torch-cuda"):
                rows.add((m[1], m[3], m[4].strip(), int(seconds), int(m[2]), step))
    return rows


def readme_campaigns(text):
    rows = set()
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[3].isdigit():
            rows.add((cells[0], cells[1], cells[2], int(cells[3]), int(cells[4]), cells[5]))
    return rows


def test_the_readme_lists_the_launchers_campaigns():
    script = launcher_campaigns((ROOT / "tools" / "device_verify.sh").read_text())
    readme = readme_campaigns((ROOT / "campaigns" / "README.md").read_text())
    assert len(script) >= 10 and {r[5] for r in script} >= {"presets", "sglang", "rest"}, script
    assert readme == script, (sorted(readme - script), sorted(script - readme))


def test_the_parser_sees_a_changed_campaign():
    wave = ('want rest && wave 60 "the rest" \\\n'
            '  "mono_moe 3 flashinfer.mono_moe" "torch_cuda 4 torch-cuda --op moe"\nstep "digest"\n')
    assert launcher_campaigns(wave) == {("mono_moe", "flashinfer.mono_moe", "", 60, 3, "rest"),
                                        ("torch_cuda", "torch-cuda", "--op moe", 60, 4, "rest")}
    row = "| `a` | `x.y` | `--model m` | 60 | 3 | rest |"
    assert readme_campaigns(row) == {("a", "x.y", "--model m", 60, 3, "rest")}
