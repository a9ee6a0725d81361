"""An application instrumented the way the OpenTelemetry docs show: the official
`opentelemetry-instrumentation-openai-v2` around a real `openai` client, spans exported over OTLP/HTTP
(protobuf) to `--otlp`. It asks `--n` chat questions (every third streamed) of each `--model` at `--base-url`
and prints how many were answered. Run as its own process, so its global tracer provider is its own.

    python -m tests.support.genai_app --base-url URL --model sim-stable --otlp http://observer/v1/traces
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, action="append", help="per --model, in order")
    parser.add_argument("--model", required=True, action="append")
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--token", default="")
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--content", default="span_only", help="OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    args = parser.parse_args()
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = args.content

    import openai
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot",
                                                        "service.version": "2026.12"}))
    headers = {"authorization": f"Bearer {args.token}"} if args.token else {}
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.otlp, headers=headers)))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    answered = 0
    for base_url, model in zip(args.base_url, args.model, strict=True):
        client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
        for i in range(args.n):
            messages = [{"role": "system", "content": "You answer support questions briefly."},
                        {"role": "user", "content": f"Ticket {i}: reset the password of jo{i}@example.com"}]
            if i % 3 == 2:
                stream = client.chat.completions.create(model=model, messages=messages, max_tokens=16, stream=True,
                                                        temperature=0.2)
                answered += sum(1 for _ in stream) > 0
            else:
                reply = client.chat.completions.create(model=model, messages=messages, max_tokens=16,
                                                       temperature=0.2)
                answered += bool(reply.choices[0].message.content)
    provider.force_flush()
    provider.shutdown()
    print(f"answered {answered}")


if __name__ == "__main__":
    main()
