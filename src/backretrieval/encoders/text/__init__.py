"""Text models: each module registers the text models it provides."""
