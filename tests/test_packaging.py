"""The built wheel works on its own: installed into a fresh virtual environment that
holds only its declared dependencies, it runs the README's quick start from a temporary
directory, far from the repository."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from support import run_python

ROOT = Path(__file__).resolve().parent.parent


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"## Quick start\n.*?```python\n(.*?)```", readme, flags=re.S)
    assert found is not None, "README.md has no python block under '## Quick start'"
    return found.group(1)


def build(outdir: Path) -> tuple[Path, Path]:
    """Build the sdist and the wheel with ``python -m build``; (wheel, sdist)."""
    result = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(outdir), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = outdir.glob("covonaut_es-*.whl")
    (sdist,) = outdir.glob("covonaut_es-*.tar.gz")
    return wheel, sdist


def runtime_requirements(wheel_metadata: str) -> list[Requirement]:
    requirements = [
        Requirement(line.split(":", 1)[1].strip())
        for line in wheel_metadata.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def link_dependencies(requirements: list[Requirement], site_packages: Path) -> set[str]:
    """Link the installed distributions that ``requirements`` need, transitively, into
    ``site_packages``: the environment gets exactly the declared dependencies, without
    a package index. Returns their names."""
    linked: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in linked:
            continue
        linked.add(name)
        distribution = importlib.metadata.distribution(name)
        tops = {f.parts[0] for f in distribution.files or () if f.parts[0] not in ("..", "")}
        for top in tops - {"__pycache__"}:
            source = Path(str(distribution.locate_file(top)))
            if not (site_packages / top).exists():
                (site_packages / top).symlink_to(source)
        todo += runtime_requirements(distribution.read_text("METADATA") or "")
    return linked


def test_the_wheel_runs_the_quick_start_in_a_fresh_environment(tmp_path: Path) -> None:
    """python -m build makes a wheel, which carries LICENSE in its dist-info and the
    inbox's templates and static files, and an sdist; the wheel, installed alone into a
    fresh virtual environment with only its declared dependencies, imports from that
    environment and runs the README's quick start in an empty directory."""
    wheel, sdist = build(tmp_path / "dist")
    assert sdist.stat().st_size > 0
    with zipfile.ZipFile(wheel) as archive:
        (license_name,) = [
            n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")
        ]
        assert archive.read(license_name).decode() == (ROOT / "LICENSE").read_text()
        inbox = ROOT / "src" / "covonaut_es" / "inbox"
        for data in (*inbox.glob("templates/*.html"), *inbox.glob("static/*")):
            assert f"covonaut_es/inbox/{data.parent.name}/{data.name}" in archive.namelist()

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site_packages = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    (dist_info,) = site_packages.glob("covonaut_es-*.dist-info")
    metadata = (dist_info / "METADATA").read_text()
    assert "License-File: LICENSE" in metadata.splitlines()
    linked = link_dependencies(runtime_requirements(metadata), site_packages)
    assert {"eventsourcing", "msgspec", "attrs"} <= linked

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # No optional extra is installed here: the star import must not need one.
    code = quick_start() + (
        "\nfrom covonaut_es import *\n"
        "import covonaut_es\nprint('imported from', covonaut_es.__file__)\n"
    )
    result = run_python("-c", code, python=python, cwd=workdir, env=environment)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Paused: payment needs a review")
    assert lines[-1] == f"imported from {site_packages / 'covonaut_es' / '__init__.py'}"


def test_the_package_swaps_no_class_and_makes_none_at_run_time() -> None:
    """No object of the package gets its class assigned, and no class is made with
    ``type(name, bases, namespace)``: each back end's recorders are real classes."""
    found = []
    for path in sorted((ROOT / "src" / "covonaut_es").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign | ast.AugAssign)
                else []
            )
            if any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in targets):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: __class__ assigned")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "type"
                and len(node.args) == 3
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: class made by type()")
    assert found == []
