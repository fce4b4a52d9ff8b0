"""Train LeNet-5 on MNIST with sparkdl's distributed engine — the README's main job as a script.

Runs with plain Python (Spark ``local[*]``) or under ``spark-submit`` (uses the session spark-submit
configures); every option of ``sparkdl train`` works here too::

    python examples/train_lenet5_mnist.py --epochs 7
    spark-submit --master local[2] examples/train_lenet5_mnist.py --limit 10000 --epochs 1 --json
"""
import sys

from sparkdl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", "--model", "lenet5", "--dataset", "mnist", *sys.argv[1:]]))
