"""The main window's frame: menus, guide, status bar, preferences, palette, splitters and fitting to the screen."""
