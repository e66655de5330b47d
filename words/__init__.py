"""A chat's records (replies, comparisons, sessions) and the sentences and number formats that tell them: what the
window, the export and the CLI all say, from one place. No Qt and no torch: it sits below app/ and ui/."""
