"""The README's first command (`radixlm demo`) as a script: see radixlm/demo.py for the program.

python examples/demo.py
"""

from radixlm.demo import main

if __name__ == "__main__":
    main()
