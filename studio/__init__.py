"""The composition root: builds the window (ui/) around the chat controller and workers (app/) and starts it."""
