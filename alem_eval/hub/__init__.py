"""The released layout: the manifest, selectors, sources (the Hub, local directories, the bundled demo cells) and writing cells in that layout."""
