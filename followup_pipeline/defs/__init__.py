"""One folder per capability; each module ``definitions`` says what it contributes."""
