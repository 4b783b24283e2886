def register(s): pass
