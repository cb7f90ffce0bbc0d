"""One cell's statistics: residualising, the correlation, its interval and p-value, the line's check."""
