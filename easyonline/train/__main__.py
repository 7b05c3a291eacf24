"""Entry point of ``python -m easyonline.train``; see easyonline/train/cli.py."""
from easyonline.train.cli import run

if __name__ == "__main__":
    run()
