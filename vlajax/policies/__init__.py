"""A trained model as a policy: the simulator bridge (`bridge`), the pi0 inputs (`pi`),
`Policy` (`policy`), a run's files (`run_files`), the openpi checkpoint import
(`import_openpi`) and the SFT memory plan (`memory`)."""
