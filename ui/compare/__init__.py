"""Compare with AR and Compare drafters: the table under a reply and the drafters dialog (their words:
words/compare.py; their runs: app/chat/worker.py)."""
