// engine tests: written below
