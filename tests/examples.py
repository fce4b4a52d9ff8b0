"""Loading a script of ``examples/`` as a module (the examples are scripts, not a package)."""
import importlib.util
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example(name: str):
    """The module ``examples/<name>.py``, freshly executed."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
