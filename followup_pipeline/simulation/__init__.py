"""``followup simulate``: the whole machine over simulated business days, with chaos."""
