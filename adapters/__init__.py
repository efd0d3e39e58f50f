"""Wire-protocol adapters: pure translation between each protocol and the neutral core."""
