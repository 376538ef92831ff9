from hta_report.cli import run

run()
