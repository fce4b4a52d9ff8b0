"""The layout's one-way dependencies: the engine and the training step never import the single-process trainer
(sparkdl/trainer.py); both build on sparkdl.step. Checked on the source (every import statement, function-level
ones included), not on what happens to be imported at run time."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _imported_modules(source: str, module: str) -> set:
    """Every module an import statement of ``source`` (the text of module ``module``) names, resolved to an absolute
    dotted name: ``import a.b`` gives ``a.b``; ``from a import b`` gives ``a`` and ``a.b`` (b may be a module)."""
    package = module.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names |= {f"{base}.{a.name}" for a in node.names}
    return names


def _modules(package_dir: str):
    for base, _, files in os.walk(os.path.join(ROOT, *package_dir.split("/"))):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(base, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                with open(path, encoding="utf-8") as fh:
                    yield rel.removesuffix(".__init__"), fh.read()


def _forbidden(names: set, forbidden: tuple) -> list:
    return sorted(n for n in names if any(n == f or n.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("source, found", [
    ("import sparkdl.trainer", ["sparkdl.trainer"]),
    ("from sparkdl.trainer import fit", ["sparkdl.trainer", "sparkdl.trainer.fit"]),
    ("from sparkdl import nn, trainer", ["sparkdl.trainer"]),
    ("def f():\n    from ..trainer import train_step\n", ["sparkdl.trainer", "sparkdl.trainer.train_step"]),
    ("from sparkdl.step import train_step\nimport sparkdl.engine.tasks", []),
])
def test_the_check_finds_every_form_of_import(source, found):
    assert _forbidden(_imported_modules(source, "sparkdl.engine.worker"), ("sparkdl.trainer",)) == found


def test_the_engine_does_not_import_the_single_process_trainer():
    modules = dict(_modules("sparkdl/engine"))
    assert "sparkdl.engine" in modules and "sparkdl.engine.trainer" in modules  # the walk sees the package
    offenders = {m: _forbidden(_imported_modules(src, m if m != "sparkdl.engine" else "sparkdl.engine.__init__"),
                               ("sparkdl.trainer",))
                 for m, src in modules.items()}
    assert {m: f for m, f in offenders.items() if f} == {}


def test_the_step_imports_nothing_above_it():
    modules = dict(_modules("sparkdl/step"))
    assert {"sparkdl.step", "sparkdl.step.gradient", "sparkdl.step.threads"} <= set(modules)
    above = ("sparkdl.trainer", "sparkdl.engine", "sparkdl.ml", "sparkdl.cli")
    offenders = {m: _forbidden(_imported_modules(src, m if m != "sparkdl.step" else "sparkdl.step.__init__"), above)
                 for m, src in modules.items()}
    assert {m: f for m, f in offenders.items() if f} == {}


def test_the_old_step_module_is_gone():
    assert not os.path.exists(os.path.join(ROOT, "sparkdl", "parallel_step.py"))
