"""Background folding: the durable job worker, chapter and synopsis jobs, the one model call a
chronicler request becomes, and how long a turn waits for a fold."""
