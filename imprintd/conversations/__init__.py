"""What a user does with their stored conversations: search them all, name them."""
