"""Entry point of ``python -m easyonline.train``; see easyonline/jobs/train_cli.py."""
from easyonline.jobs.train_cli import run

if __name__ == "__main__":
    run()
