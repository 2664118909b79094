"""The judge: runs every test cell in the grader, asks the kernel only for data, and keeps the
ledger of points a cell earns."""
