"""How the running observer is put together: the seams (`runtime`), each area's wiring, and the root."""
