"""Entry point of ``python -m easyonline.eval``; see easyonline/jobs/eval_cli.py."""
from easyonline.jobs.eval_cli import run

if __name__ == "__main__":
    run()
