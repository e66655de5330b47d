"""Entry points and controllers: the `specdec` CLI (cli/), a chat's controller, worker, store and export (chat/), the
model pair's library and machine (pair/), and the why-γ analysis (why.py). No widget is imported here: the window is
built above, in studio/."""
