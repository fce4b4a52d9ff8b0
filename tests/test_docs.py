"""What a new user reads and installs: the README and docs link only inside the repository, the install
extras they name exist, and runtime dependencies are exactly what the library imports."""
import ast
import configparser
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", os.path.join("docs", "architecture.md"), os.path.join("docs", "data-beyond-memory.md"),
        os.path.join("docs", "scaling.md"), os.path.join("docs", "connect.md")]


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _setup():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return cfg


def _requirements(text):
    return {re.split(r"[<>=!~;\[ ]", line.strip())[0].lower() for line in text.splitlines() if line.strip()}


@pytest.mark.parametrize("doc", DOCS)
def test_links_stay_inside_the_repository(doc):
    text = _read(doc)
    assert "shared/" not in text and "DESIGN.md" not in text
    links = re.findall(r"\]\(([^)]+)\)", text)
    for link in links:
        assert not re.match(r"[a-z]+://", link), f"{doc} links outside the repository: {link}"
        target = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), link.split("#")[0]))
        assert target.startswith(ROOT + os.sep) and os.path.exists(target), f"{doc}: broken link {link}"
    assert not re.search(r"(?<![\w`])https?://", text), f"{doc} names an address outside the repository"


def test_readme_points_to_the_architecture_document():
    assert "](docs/architecture.md)" in _read("README.md")


def test_readme_names_the_extras_it_needs_and_they_exist():
    extras = _setup()["options.extras_require"]
    readme = _read("README.md")
    notebooks = _requirements(extras["notebooks"])
    assert {"jupyter", "matplotlib"} <= notebooks
    assert "tensorboard" in _requirements(extras["tensorboard"])
    command = re.search(r"pip install -e '\.\[notebooks\]' && jupyter notebook (\S+)", readme)
    assert command and os.path.exists(os.path.join(ROOT, command.group(1)))
    assert "pip install -e '.[tensorboard]'" in readme


def _imported_top_level(directory):
    names = set()
    for base, _, files in os.walk(os.path.join(ROOT, directory)):
        for f in files:
            if f.endswith(".py"):
                tree = ast.parse(_read(os.path.join(base, f)))
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        names |= {a.name.split(".")[0] for a in node.names}
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names.add(node.module.split(".")[0])
    return names


def test_runtime_dependencies_are_what_the_library_imports():
    required = _requirements(_setup()["options"]["install_requires"])
    imported = {n.lower() for n in _imported_top_level("sparkdl")}
    for req in required - {"tbb"}:  # tbb: a native library numba's threading layer loads (sparkdl.config)
        assert req in imported, f"install_requires has {req}, which sparkdl never imports"
    # and the reverse: every third-party module the library imports is a runtime requirement or an extra's
    extras = {r for reqs in _setup()["options.extras_require"].values() for r in _requirements(reqs)}
    assert "scipy" in required  # numba's np.dot inside kernels (recurrent layers) calls SciPy's BLAS
    assert {"numpy", "numba", "pyspark"} <= required and "onnx" in extras
