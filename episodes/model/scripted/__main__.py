"""`python -m episodes.model.scripted`: serve the scripted upstream until interrupted."""

from episodes.model.scripted.server import main

main()
