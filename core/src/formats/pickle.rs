//! A restricted pickle reader that executes nothing. Not written yet (a stub).
