"""An unmodified agent: one OpenAI and one Anthropic call against the stub at $STUB_URL.

Run by test_llm_subprocess.py under ``opentelemetry-instrument python llm_agent_app.py``;
it knows nothing of OpenTelemetry.
"""

import os

import anthropic
import openai

url = os.environ["STUB_URL"]
oa = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
reply = oa.chat.completions.create(
    model="gpt-4o-mini", max_completion_tokens=200,
    messages=[{"role": "system", "content": "You are a support agent."},
              {"role": "user", "content": "Where is my order?"}])
print("openai:", reply.choices[0].message.content)
an = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
with an.messages.stream(model="claude-sonnet-4-6", max_tokens=200,
                        system="You are a support agent.",
                        messages=[{"role": "user", "content": "Where is my order?"}]) as s:
    print("anthropic:", "".join(s.text_stream))
