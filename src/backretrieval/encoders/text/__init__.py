"""Text models: each model module registers the text models it provides; ``batching`` is the
batched text base and the text helpers, ``python_model`` a user's object as a text model and
``embedding_server`` a server that answers the embeddings protocol with any text model."""
