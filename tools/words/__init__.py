"""The words: what worldtune talks about (Workload, Plan and its rules, Offer, Infra, Deployment and the Backend
interface, Goal, Profile, the benchmark Sample and Result, Estimate, the spend estimate, errors). They import
nothing but each other, pydantic and the standard library; every other room stands on them."""
