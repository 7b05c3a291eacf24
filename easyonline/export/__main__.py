"""Entry point of ``python -m easyonline.export``; see easyonline/jobs/export_cli.py."""
from easyonline.jobs.export_cli import run

if __name__ == "__main__":
    run()
