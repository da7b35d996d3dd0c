"""Run one program over many inputs with run_batch and a progress bar.

python examples/batch.py
"""

import radixlm as sgl


@sgl.function
def classify(s, review):
    s += "Classify the sentiment of each review.\n\n"
    s += "Review: I loved every minute.\nSentiment: positive\n\n"
    s += "Review: Waste of money.\nSentiment: negative\n\n"
    s += "Review: " + review + "\nSentiment:" + sgl.select("sentiment", choices=[" positive", " negative"])


REVIEWS = [
    "Great food and friendly staff.",
    "The battery died after a day.",
    "Would buy again!",
    "Terrible customer service.",
    "Exceeded my expectations.",
    "It broke in a week.",
] * 4

if __name__ == "__main__":
    with sgl.Runtime(model="smollm2-135m") as runtime:
        states = classify.run_batch([{"review": r} for r in REVIEWS], backend=runtime, progress_bar=True)
        for review, state in list(zip(REVIEWS, states))[:6]:
            print(f"{state['sentiment'].strip():>8}  {review}")
