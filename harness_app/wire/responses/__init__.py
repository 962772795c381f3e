"""OpenAI Responses: its requests as chat requests (request.py), and chat answers as its
answers, whole and streamed (answer.py)."""
