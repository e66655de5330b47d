"""Training the embedded draft by distillation from the target."""
