"""The browser the agent drives: a port (`port.Browser`), the page operations both adapters run
(`actions`), the bot-check detector (`detect`), the local pool (`local`) and the Lambda host (`host`)."""
