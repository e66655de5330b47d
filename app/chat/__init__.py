"""A conversation: its controller (turns, state, store), the worker that decodes on its thread, the saved chats,
the timings that judge a reply fair, and its export."""
