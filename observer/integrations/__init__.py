"""Code that runs inside the tools users already have, and sends what they see to the observer."""
