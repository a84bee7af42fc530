"""Print, one per line, the requirements among the arguments that this Python environment does not satisfy.

Usage: ``python scripts/missing_requirements.py REQUIREMENT...``, where a requirement is a PEP 508 string
(``"llama-cpp-python[server]==0.3.36"``: the package, its version and the packages of its extras) or ``.[extra,...]``
for this project's own extras, read from pyproject.toml (so an extra added since the last install counts). Nothing
printed means everything is there; the exit code is 0 either way. ``scripts/test.sh`` installs what this prints.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib
try:
    from packaging.requirements import Requirement
except ModuleNotFoundError:
    from pip._vendor.packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def project_requirements(extras: list[str]) -> list[Requirement]:
    """The requirements of this project's ``extras``, with ``activeprp[...]`` self-references expanded."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    out, todo, seen = [Requirement(r) for r in project["dependencies"]], list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in project["optional-dependencies"]:
            raise SystemExit(f"{PYPROJECT} declares no extra {extra!r}")
        for text in project["optional-dependencies"][extra]:
            req = Requirement(text)
            if req.name == project["name"]:
                todo += sorted(req.extras)
            else:
                out.append(req)
    return out


def satisfied(req: Requirement, extra: str = "") -> bool:
    """Whether ``req`` (when its marker applies) is installed at an allowed version, with its extras' packages."""
    if req.marker is not None and not req.marker.evaluate({"extra": extra}):
        return True
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return False
    if not req.specifier.contains(version, prereleases=True):
        return False
    for name in req.extras:  # one level: the packages that the extra adds
        deps = [Requirement(d) for d in metadata.requires(req.name) or []]
        if not all(satisfied(d, name) for d in deps if d.marker is not None and "extra" in str(d.marker)):
            return False
    return True


def main(args: list[str]) -> int:
    for arg in args:
        reqs = project_requirements(arg[2:-1].split(",")) if arg.startswith(".[") else [Requirement(arg)]
        for req in reqs:
            if not satisfied(req):
                print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
