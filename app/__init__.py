"""Entry points: the `specdec` CLI and the `specdec-studio` window; they create objects and connect them."""
