"""`specdec bench` and the seed's reference algorithm it compares against."""
