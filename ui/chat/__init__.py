"""The conversation pane: the transcript drawn as a document, its looks, notes and links, the token inspector,
the legend, the message box and the history of saved chats."""
