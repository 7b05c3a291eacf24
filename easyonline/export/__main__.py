"""Entry point of ``python -m easyonline.export``; see easyonline/export/cli.py."""
from easyonline.export.cli import run

if __name__ == "__main__":
    run()
