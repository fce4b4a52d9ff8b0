"""``python -m sparkdl.jvm``: print the path of the bridge jar inside the installed package."""
from sparkdl.jvm import jar_path

print(jar_path())
