"""The domain words (Workload, Plan, Offer, Goal, Profile, Result) and the typed capabilities over them."""
